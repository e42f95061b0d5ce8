"""The project's local Spanner server: the real Spanner gRPC API with change streams, for demos and tests."""
