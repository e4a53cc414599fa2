from gbfix.cli import main

main()
