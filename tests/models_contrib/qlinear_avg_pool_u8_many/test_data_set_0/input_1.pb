BxsJ
ף<