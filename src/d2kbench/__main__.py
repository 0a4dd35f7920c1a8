from d2kbench.cli import main

raise SystemExit(main())
