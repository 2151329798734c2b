from clustereval.cli import main

main()
