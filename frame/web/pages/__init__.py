"""The web app's pages, one blueprint per page (see frame.web)."""
