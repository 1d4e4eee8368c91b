"""One module per training method: its settings dataclass, its formulas and its trainer class
(registered in `config.TRAINING_METHODS`; the map: `training/README.md`)."""
