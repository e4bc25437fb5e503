"""The dashboard's pages, one module per page (``base`` holds what they share)."""
