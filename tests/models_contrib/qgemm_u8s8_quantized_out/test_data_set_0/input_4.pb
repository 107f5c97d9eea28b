BbsJ
×#<