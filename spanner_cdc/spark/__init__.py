"""Spark side of the extract: sessions for the three run modes, the change stream data source, token jobs, launchers."""
