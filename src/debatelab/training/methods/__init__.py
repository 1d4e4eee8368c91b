"""One module per training method: its settings dataclass, its formulas and its trainer class
(registered in `training/registry.py`; the map: `training/README.md`)."""
