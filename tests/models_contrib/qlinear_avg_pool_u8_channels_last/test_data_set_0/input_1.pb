BxsJ
×#=