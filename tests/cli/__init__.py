"""The `pgwire-cdc` command line."""
