"""The engine layer: BioMemory, one access policy for every surface. Sessions, the async face, results, the
door → role table, the names a request may reach the server by, API keys, the error titles every surface shows,
and the demo."""
