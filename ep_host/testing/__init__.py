"""Test material for EP authors and ep-host's own tests: model builders and reference runs."""
