BwsJ
×#<