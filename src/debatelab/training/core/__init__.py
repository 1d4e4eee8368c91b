"""What every training method shares (the map: `training/README.md`)."""
