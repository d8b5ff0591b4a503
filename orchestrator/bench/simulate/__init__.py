"""Virtual-time fleet simulation: Offline and Server scenarios over the real routing profiles."""
