"""Network faults: the model (``base``) and one module per mechanism."""
