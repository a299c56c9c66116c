"""The targets of scripts/reproduce.py, one module a table or figure of the paper;
runs.py holds what they share."""
