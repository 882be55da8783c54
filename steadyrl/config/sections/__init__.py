"""The config's sections, one module each; :mod:`steadyrl.config.schema` is their face."""
