from tfcluster.cli.main import console

console()
