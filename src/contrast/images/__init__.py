"""Container images: registries and OCI layouts, configs, users from layers, the layer cache."""
