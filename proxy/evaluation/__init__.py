"""`overspill eval`: how much of a conversation survives compaction, measured on any model.

    probes.py         what is asked after compaction, and how an answer is scored (pure)
    conversations.py  seeded conversations that plant every kind of probe (pure)
    conditions.py     what the model is shown instead of the whole conversation
    runner.py         plays conversations through a system (or a running server), asks, scores
    report.py         JSON lines, the printed table, the optional chart

Nothing here is on the serving path: only the CLI (proxy/eval_cli.py) imports it.
"""
