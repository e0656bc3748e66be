"""The pure core: a transcript's entries, the agent's token figures, the running ledger, the budget, the one
decision, the planning of a compaction and its pruning, and the turn state. Nothing here does I/O (no file,
socket, thread, clock-dependent wait or model call; ``tests/test_layers.py`` holds it so): every function takes
values and returns values, and the edges (:mod:`compactd.sources`, :mod:`compactd.commit`,
:mod:`compactd.summarize`'s client) do the reading and writing."""
