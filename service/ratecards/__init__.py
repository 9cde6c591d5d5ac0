"""ratecards."""
