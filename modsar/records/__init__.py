"""Records: the one Parquet row every run writes, read back under a results root (`rows`); which rows a
command uses (`selection`: the checkpoints `modsar analyze --experiment` loads, the rows `modsar report`
covers); a single recorded training run (`run`, `modsar train`); a saved checkpoint scored again beside its
row (`rescore`, `modsar evaluate`)."""
