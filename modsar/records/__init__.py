"""Records: the one Parquet row every run writes, read back under a results root (`rows`); a single recorded
training run (`run`, `modsar train`); a saved checkpoint scored again beside its row (`rescore`, `modsar
evaluate`)."""
