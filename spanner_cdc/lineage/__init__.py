"""Pure lineage rules: partition states and their transitions, where a re-read starts, window completeness. No I/O;
imports nothing of the project but errors."""
