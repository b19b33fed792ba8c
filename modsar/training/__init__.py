"""Training: the trainer (`trainer`), what a run carries and saves (`state`), how a checkpoint is loaded back
(`checkpoints`), the optimizer and its learning rate (`optim`), the FLOPs count (`flops`), the heap bound
(`heap`) and the checks of a configuration against a dataset before any training (`feasible`)."""
