from cloudddp.cli.app import main

main()
