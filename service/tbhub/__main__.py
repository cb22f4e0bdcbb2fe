from tbhub.cli.main import main

main()
