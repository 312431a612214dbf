"""The porting side of each model family: one module per family names its formats' references."""
