from tbhub.cli.main import app

app()
