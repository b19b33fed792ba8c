"""Analysis (`modsar analyze`): the seed papers' diagnostics as pure functions (`diagnostics`), measured on a
trained checkpoint (`analyze`), printed, tabled and drawn (`output`)."""
