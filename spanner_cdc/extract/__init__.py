"""The extract: plan a window (retention guard, bootstrap), run waves of token jobs, close it (check and marker); the store,
the database and the Spark session are passed in. Imports spark/, store/, lake/, source/ and lineage/; never devstack/."""
