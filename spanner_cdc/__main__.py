from spanner_cdc.cli.main import main

raise SystemExit(main())
