package migrate

// SplitStatements exposes splitStatements to the tests.
var SplitStatements = splitStatements
