"""Training: the trainer (`trainer`), what it saves and how a checkpoint is loaded back (`checkpoints`), the
optimizer of the BERT environment (`optim`), the FLOPs count (`flops`), the heap bound (`heap`) and the checks of a
configuration against a dataset before any training (`feasible`)."""
