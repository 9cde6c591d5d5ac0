"""Budget alerts: the messages sent when spend crosses a limit, and how they are delivered."""
