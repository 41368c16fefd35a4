"""Start-up: the `cairn` CLI, the embedded services' bootstrap, the Serve
deployments and the HAProxy launcher (the only code that knows Serve)."""
