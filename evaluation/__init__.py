"""`overspill eval`: how much of a conversation survives compaction, measured on any model.

    probes.py         what is asked after compaction, and how an answer is scored (pure)
    conversations.py  seeded conversations that plant every kind of probe (pure)
    phrasings.py      the words each planted episode is said in: tune, held-out, blind templates
    conditions.py     what the model is shown instead of the whole conversation
    runner.py         plays conversations through a system (or a running server), asks, scores
    report.py         JSON lines, the printed table, the optional chart
    targets.py        the system in process, or a running overspill over HTTP
    cli.py            `overspill eval`'s options and run (cli/main.py adds it to `overspill`)
    ledger.py         what the fact ledger alone keeps, no model (`python -m evaluation.ledger`)
    replay.py         recorded probes asked again with one rendering changed
                      (`python -m evaluation.replay`)

A tool beside the server, not part of it: the serving modules never import it (an
import-linter contract), and its generator and scoring stay pure.
"""
