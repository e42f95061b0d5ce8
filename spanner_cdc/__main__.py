from spanner_cdc.cli import main

raise SystemExit(main())
