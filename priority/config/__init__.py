"""The daemon's TOML configuration: reading, validation, and its link to the cluster description."""
