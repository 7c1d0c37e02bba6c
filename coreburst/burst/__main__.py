from coreburst.burst.cli import main

main()
