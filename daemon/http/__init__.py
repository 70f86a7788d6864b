"""The HTTP API: app factory, server, one blueprint per resource."""
