import GranaryCLI

GranaryMain.main()
