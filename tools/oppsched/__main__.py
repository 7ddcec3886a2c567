from oppsched.cli import main

raise SystemExit(main())
