"""evaluations: reported evaluation results and the cost-effect report."""
