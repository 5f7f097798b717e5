"""The command line: thin; it resolves access, calls the layers below and renders."""
