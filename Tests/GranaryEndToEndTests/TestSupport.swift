// What every test target shares (Tests/GranaryTestSupport), visible in each file of this target.
@_exported import GranaryTestSupport
