"""The original encoder-decoder Transformer (Vaswani et al., 2017) on small translation tasks.

`config` shapes and presets, `model` the network (`encode`, `decode`, `generator`), `names` the
activation names, `trace` the typed record of one pass, `tasks` and `vocab` the toy tasks,
`training` teacher-forced training through the shared `Trainer`, `decoding` greedy / beam search /
teacher forcing vs free running, `engine` a model with its vocabularies, `checkpoint` the folders
(and the shipped ones), `cli` and `api` the command line and the JSON API.
"""
