"""One module per actor kind, with the messages it handles."""
