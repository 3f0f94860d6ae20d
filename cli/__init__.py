"""The `overspill` command: the one package above both the server (`proxy/`) and the evaluation
(`evaluation/`), so that neither has to import the other to offer its commands."""
