"""See tests/__init__.py."""
