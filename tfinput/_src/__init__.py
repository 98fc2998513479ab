"""tfinput's implementation, private: the public modules beside this package re-export
what is public (docs/api.md). Three layers, each importing only the ones below it
(docs/architecture.md, tests/test_layers.py): `core`, `measurement`, `applications`."""
