"""The pytest side: the plugin, serve cases, the shared topology pool, ordering, results."""
