"""Default budget files, one per profile (package data)."""
