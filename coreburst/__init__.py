"""The `coreburst` command: one entry point that loads each product only when it is used."""
