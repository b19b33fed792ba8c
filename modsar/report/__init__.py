"""`modsar report`: the AE-vs-AR verdict of a results folder."""
