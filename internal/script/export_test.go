package script

// NoFunctions is noFunctions.
var NoFunctions = noFunctions
